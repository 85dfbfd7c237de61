"""The arena's arms and the training methods (:mod:`scd.train.arms.base`), one module each
(registered by name in :mod:`scd.config.arms`)."""
