"""The PyTorch training recipes Trainyard ships as paved-road templates.

Each module runs as ``python -m recipes.<name>`` inside a job (the node agent sets the
environment described in :mod:`trainyard.job`) or by hand, and declares its parameters in
``PARAM_SCHEMA`` (JSON Schema draft 2020-12). Importing a recipe module to read its schema is
cheap: torch and scikit-learn load only when ``main()`` runs. The parameters several recipes
take are defined once, in :mod:`recipes.params`, and referenced from there.

- ``digits_classifier``: train an MLP or CNN on scikit-learn's digits.
- ``finetune``: continue from another run's checkpoint with leading layers frozen.
- ``ddp_train``: ``digits_classifier`` under DistributedDataParallel across all ranks.
- ``evaluate``: score another run's checkpoint on the held-out test split.
"""
