"""Where an experiment's trials came from and what they were: the fingerprints of the code,
the data and own code's files (``provenance``, ``data_fingerprint``, ``own_code_files``), the
store of trained trials that a later experiment reuses (``trial_store``) and experiment.json
as a run starts (``experiment_record``)."""
