"""The Models and Replicas screens, and the Serve dialog that adds a model."""
