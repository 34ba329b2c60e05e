"""The cluster's CA, certificates and TLS settings."""
