import Testing
import VaultSystem
