"""Setting a machine up: the init plans, the starter model and the doctor's checks."""
