#!/usr/bin/env bash
# Install what is needed, then run the main job on the embedded default corpus.
source "$(dirname "${BASH_SOURCE[0]}")/_env.sh"
python pipelines/backtranslate.py "$@"
