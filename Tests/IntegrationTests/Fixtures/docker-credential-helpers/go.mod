module github.com/docker/docker-credential-helpers

go 1.19
