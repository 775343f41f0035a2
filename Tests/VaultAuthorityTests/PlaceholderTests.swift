import Testing
import VaultAuthority
