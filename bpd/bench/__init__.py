"""Benchmarking: wall-clock timing of our decoders and of other libraries', and what it is built from.

* ``timing``: ``make bench``'s paired round-robin timing (greedy and every decoder back to back per batch, repeated
  until the speedups' intervals are narrow), warm-up, paired estimates;
* ``rows``: a batch size's repeats aggregated into rows (speedup, ideal, efficiency, prediction), and the
  printed tables;
* ``step_costs``: one decoding step or round timed in isolation, and its parts;
* ``speedup_ci``: the paired speedup estimate and its bootstrap interval (evaluation rows use it too);
* ``specbench``: Spec-Bench's per-example records and its speedup formula;
* ``cost_model``: what a round costs against a greedy step across model sizes (``bench/bench_scale.py``);
* ``peers``: our decoders timed beside Hugging Face transformers and CTranslate2 (``make bench-peers``).

Nothing is imported here, so that a module reading one piece (evaluation reads ``speedup_ci``) loads only it.
"""
