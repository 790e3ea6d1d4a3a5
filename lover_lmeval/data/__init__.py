"""Datasets behind the tasks: loaders for lm-eval's `custom_dataset` (tasks.py) and our iGSM generator (igsm.py; its
category families and items in igsm_names.py)."""
