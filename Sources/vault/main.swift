import VaultCLI
import Glibc

exit(VaultCLI.main())
