"""The `lover` command line (cli.py): train, compare, igsm, with the diagnostics and plots they write. Apps use the
core pipeline, and the lm-eval adapter where they run lm-eval."""
