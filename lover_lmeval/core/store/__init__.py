"""Store: what cost hours to compute, kept across runs and kills.

- bank.py        decoded branches by record key (`BranchBank`), and the local feature cache;
- bank_store.py  the crash-safe stores behind them: gzip members or SQLite.

Imports the decode stage's `Branch` only.
"""
