"""What the console tests drive screens with: fake admin clients, fixed clusters and consoles
(for snapshots and docs), and pilot helpers."""
