"""The MLflow UI in a real browser: a tiny real training run, a real `mlflow server` process, headless Chromium.

Debian's `chromium` and `chromium-driver` are installed by the set-up when missing
(apt-get, as root); Selenium drives the system chromedriver, so nothing is
downloaded at run time. Chromium runs network-isolated (no sync, no component
updates, no background requests, a fresh profile) and only talks to the loopback
server. Screenshots go to the test's tmp_path and to runs/screenshots/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import mlflow
import pytest

from mtcore.distributed import ray_training

from mtcore import tracking
from mtcore.tracking import ui
from mtcore.distributed.jobs import TrainingJob
from mtcore.data.paths import REPO_ROOT

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--window-size=1920,1080",
)
PAGE_TIMEOUT_S = 120  # the SPA's first load on a busy 2-core machine
SCREENSHOTS = REPO_ROOT / "runs" / "screenshots"

pytestmark = pytest.mark.slow


def _ensure_chromium() -> None:
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("Debian chromium/chromium-driver are missing and cannot be installed here (needs root and apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium", "chromium-driver"]
    if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"apt-get install chromium chromium-driver failed:\n{done.stderr[-2000:]}"
    assert CHROMIUM.exists() and CHROMEDRIVER.exists()


@pytest.fixture(scope="module")
def browser_factory():
    _ensure_chromium()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    def make(profile: Path):
        opts = webdriver.ChromeOptions()
        opts.binary_location = str(CHROMIUM)
        for flag in CHROMIUM_FLAGS + (f"--user-data-dir={profile}",):
            opts.add_argument(flag)
        return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)

    return make


@pytest.fixture
def trained_run(ray_local, mlflow_uri, tmp_path, monkeypatch, toy_corpus):
    """A tiny real Ray Train run (2 workers, 16 steps) logged to this test's own store."""
    monkeypatch.setenv("MTCORE_HOME", str(tmp_path / "runs"))
    paths = toy_corpus
    job = TrainingJob.from_dict({
        "job": {"train_data": paths["train"], "dev_data": paths["dev"], "test_data": paths["test"], "vocab_size": 400,
                "workers": 2, "test_limit": 10, "test_beam": 2, "log_model": False},
        "model": {"preset": "tiny"},
        "train": {"max_tokens": 400, "warmup": 20, "validate_every": 8, "log_every": 4, "dev_limit": 10,
                  "max_steps": 16, "max_len": 32},
    })
    outcome = ray_training.run_training(job)
    run = mlflow.MlflowClient(mlflow_uri).get_run(outcome.mlflow_run_id)
    assert run.info.status == "FINISHED"
    return run


def js_number(x: float) -> str:
    """How the MLflow UI (JavaScript's Number#toString) prints a metric value."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def test_mlflow_ui_shows_run_bleu_and_heatmap(trained_run, mlflow_uri, browser_factory, tmp_path):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    run_id, name = trained_run.info.run_id, trained_run.info.run_name
    exp_id = trained_run.info.experiment_id
    proc, server = ui.start_server(mlflow_uri, port=ui.free_port(), runs_dir=tmp_path, log_path=tmp_path / "server.log")
    driver = browser_factory(tmp_path / "chromium-profile")
    shots = []

    def body() -> str:
        return driver.find_element(By.TAG_NAME, "body").text

    def wait_for(predicate, what: str):
        try:
            WebDriverWait(driver, PAGE_TIMEOUT_S, poll_frequency=0.5).until(lambda _: predicate())
        except TimeoutException:
            driver.save_screenshot(str(tmp_path / "failure.png"))
            pytest.fail(f"{what} not shown within {PAGE_TIMEOUT_S}s at {driver.current_url}; page text:\n{body()[:3000]}")

    def screenshot(label: str) -> None:
        path = tmp_path / f"mlflow-ui-{label}.png"
        assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000
        shots.append(path)

    try:
        # The experiment page lists the run by its name (MLflow 3 opens it as a training experiment).
        driver.get(f"{server.url}/#/experiments/{exp_id}/runs")
        wait_for(lambda: "Training runs" in body() and bool(driver.find_elements(By.PARTIAL_LINK_TEXT, name[:20])),
                 f"run {name} in the experiment's runs table")
        screenshot("experiment")

        # `mtcore ui`'s link opens the runs table as a leaderboard (the shared view mtcore tags experiments
        # with): sorted by test BLEU, best first, and the leaderboard's metrics and params as its columns.
        driver.get(ui.runs_table_url(server.url, exp_id))
        wait_for(lambda: "Sort: test/bleu" in body() and "test/chrf" in body(), "the leaderboard sorted by test/bleu")
        header = driver.find_element(By.XPATH, "//*[normalize-space(text())='test/bleu']/ancestor::*[@role='row'][1]").text
        for column in ("dev/bleu", "test/bleu", "test/chrf", "model.arch"):
            assert column in header, header
        assert "train/loss" not in body()  # only the leaderboard's columns, not every metric the run logged
        screenshot("leaderboard")

        # The run page shows test/bleu (and chrF) with the logged values.
        driver.get(f"{server.url}/#/experiments/{exp_id}/runs/{run_id}")
        wait_for(lambda: "test/bleu" in body() and "test/chrf" in body(), "the run's test/bleu metric")
        for metric in ("test/bleu", "test/chrf"):
            cell = driver.find_element(By.XPATH, f"//*[normalize-space(text())='{metric}']")
            row = cell.find_element(By.XPATH, "./ancestor::*[self::tr or @role='row'][1]")
            assert row.text.split() == [metric, js_number(trained_run.data.metrics[metric])], row.text
        assert trained_run.data.tags["sacrebleu.bleu_signature"] in body()
        screenshot("run")

        # The artifact view lists the heatmaps and previews the selected one.
        driver.get(f"{server.url}/#/experiments/{exp_id}/runs/{run_id}/artifacts/attention/cross_attention_0.png")
        wait_for(lambda: "cross_attention_0.png" in body() and "encoder_self_attention_0.png" in body(),
                 "the attention heatmaps in the artifact view")
        wait_for(lambda: driver.execute_script(
            "return [...document.images].some(i => i.complete && i.naturalWidth >= 400 && i.naturalHeight >= 300)"),
            "the heatmap image preview")
        for folder in ("plots", "samples", "best_checkpoint", "tokenizer"):
            assert folder in body().split("\n"), folder
        screenshot("artifacts")
    finally:
        driver.quit()
        ui.stop_server(proc, server.port, tmp_path)
    assert proc.returncode is not None

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for path in shots:
        shutil.copy2(path, SCREENSHOTS / path.name)
    assert (SCREENSHOTS / "mlflow-ui-artifacts.png").stat().st_mtime >= time.time() - 600
