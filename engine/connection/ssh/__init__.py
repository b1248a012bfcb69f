"""The SSH transport: options, transport, host keys, exec channels, become, SFTP, the connection."""
