"""The decoding methods, one module each (greedy's holds plain and naive greedy): every ``Method`` subclass here is
found by ``bpd.decoding.registry``, and its declared name, role, label and order are read from its source by
``bpd.config.methods``. Helpers that methods share live in ``bpd/decoding/``, not here."""
