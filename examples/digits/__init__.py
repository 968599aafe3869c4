"""A small classifier on scikit-learn's bundled digits, ablated as a training function
(fit.py) and as a LightningModule (lightning_module.py)."""
