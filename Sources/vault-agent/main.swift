import VaultAgent
