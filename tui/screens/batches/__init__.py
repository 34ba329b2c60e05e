"""The Batches screen: the Batch API's batches and their progress."""
