"""Back-translation augmentation (Sennrich et al. 2016; Edunov et al. 2018; Caswell et al. 2019).

clean → align-filter → reverse (vi→en) model → back-translate monolingual Vietnamese
on Ray Data → filter the synthetic pairs → the augmented training set. See
`pipeline.run_backtranslation`.
"""

from mtcore.backtranslation.config import MODES, BTConfig, BTError
from mtcore.backtranslation.pipeline import BTResult, run_backtranslation

__all__ = ["MODES", "BTConfig", "BTError", "BTResult", "run_backtranslation"]
