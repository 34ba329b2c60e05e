"""What was used: usage rows, the gateway's metrics and the engines' scraped ones."""
