"""The lm-eval adapter: `lover_hf` (model.py), the `lover_select` filter (filter.py) and the start-up hook that
registers both with lm-eval (autoload.py). Everything it runs lives in `lover_lmeval.core`."""
