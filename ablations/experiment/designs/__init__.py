"""The designs: what trials an experiment plans, how they run on Ray Tune and what
experiment.json records of them (``base.Design``; docs/architecture.md, "Adding a design")."""
