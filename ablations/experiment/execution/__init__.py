"""The experiment on Ray Tune: the runner (``runner``: Ray, the Tuner from the design's
``tune_setup``, the fit, its recovery), the trainable, the result tables read from Tune
(``tables``, ``reported``, ``tune_state``), the progress, a stop (``interrupt``), the
first trials failing alike (``fail_fast``), Tune's console and usage tag, and a cluster's
runtime environment (``cluster``)."""
