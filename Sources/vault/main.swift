import VaultCLI
import VaultSystem

ProcessExit.exit(VaultCLI.main())
