"""The end-to-end pipeline (`scd run`): stages, run directories and the base-evaluation cache."""
