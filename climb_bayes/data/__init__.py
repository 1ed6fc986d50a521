"""Layer 1, data: the runs table and everything that reads, plans or holds out runs.

No law, model or sampler here: :mod:`~climb_bayes.data.runs` (the runs table, readers and
validators), :mod:`~climb_bayes.data.observations` (the flat observation list every law fits),
:mod:`~climb_bayes.data.design` (Algorithm-1 run plans), :mod:`~climb_bayes.data.holdout`
(held-out run selections), :mod:`~climb_bayes.data.datasets` (the shipped tables, whose files
sit in this folder) and :mod:`~climb_bayes.data.published` (published benchmark tables).
"""
