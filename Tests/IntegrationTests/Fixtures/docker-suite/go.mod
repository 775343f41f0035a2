module vault.invalid/dockersuite

go 1.19

require github.com/docker/docker-credential-helpers v0.9.8

replace github.com/docker/docker-credential-helpers => ../docker-credential-helpers
