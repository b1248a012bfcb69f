"""The persistent remote interpreter: client and pool on the controller, server.py on the host."""
