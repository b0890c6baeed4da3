"""What training costs and what it buys: feature-cache labels, acceptance against training tokens."""
