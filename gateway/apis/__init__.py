"""The client APIs, one package each."""
