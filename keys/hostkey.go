package keys

import "golang.org/x/crypto/ssh"

// HostKeyFile is the host key's file name inside the data dir.
const HostKeyFile = "ssh_host_ed25519_key"

// LoadOrCreateHostKey returns the ed25519 host key at dir/HostKeyFile,
// generating it once (mode 0600, atomic write). A key file readable by group
// or others is refused.
func LoadOrCreateHostKey(dir string) (ssh.Signer, error) {
	return nil, errTODO
}
