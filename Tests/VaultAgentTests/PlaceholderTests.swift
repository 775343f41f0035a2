import Testing
import VaultAgent
