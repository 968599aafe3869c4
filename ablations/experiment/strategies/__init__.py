"""The run kinds: what trials an experiment plans, how Tune searches and schedules them, what
experiment.json records and what happens when a search or a round ends (``base.Strategy``)."""
