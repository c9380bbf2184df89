module github.com/sandtrap/sandtrap

go 1.26.8

require (
	github.com/landlock-lsm/go-landlock v0.11.2
	github.com/pelletier/go-toml/v2 v2.4.3
	github.com/seccomp/libseccomp-golang v0.11.1
	github.com/vmihailenco/msgpack/v5 v5.4.1
	golang.org/x/sys v0.50.0
)

require (
	github.com/vmihailenco/tagparser/v2 v2.0.0 // indirect
	kernel.org/pub/linux/libs/security/libcap/psx v1.2.78 // indirect
)
