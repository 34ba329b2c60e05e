"""What the mirror answers: the hub API, the package index and blobs, the management API."""
