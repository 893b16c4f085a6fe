// Package localauth holds the embedded control plane's keys: the local-credentials file the agent
// writes at first start, request signing for Berth's own clients, and the SigV4 check the control
// plane makes on every request.
//
// The file is in the AWS shared-credentials format, so the AWS CLI and SDKs use it as they are:
//
//	AWS_SHARED_CREDENTIALS_FILE=/var/lib/ecs/data/local-credentials AWS_PROFILE=berth aws ecs list-tasks ...
package localauth

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// FileName is the keys file's name in ECS_DATADIR.
const FileName = "local-credentials"

// Profile is the file's one profile.
const Profile = "berth"

// maxFileSize bounds what Load reads; the file the agent writes is about 200 bytes.
const maxFileSize = 16 << 10

// Keys are the access key pair that signs requests to the embedded control plane.
type Keys struct {
	AccessKeyID     string
	SecretAccessKey string
}

// Path returns the keys file's path in a data directory.
func Path(dataDir string) string { return filepath.Join(dataDir, FileName) }

// Provider returns the keys as an AWS SDK credentials provider.
func (k Keys) Provider() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(k.AccessKeyID, k.SecretAccessKey, "")
}

// CLIHint is the shell prefix that makes the AWS CLI sign with the keys file at path.
func CLIHint(path string) string {
	return "AWS_SHARED_CREDENTIALS_FILE=" + path + " AWS_PROFILE=" + Profile
}

// Ensure returns the keys in path, first writing new random ones when the file does not exist. An
// existing file keeps its keys; its mode is narrowed to 0600 if it was wider. A file that cannot be
// read or parsed is an error naming it: Ensure never replaces keys a client may already hold.
func Ensure(path string) (Keys, error) {
	k, err := Load(path)
	if err == nil {
		return k, os.Chmod(path, 0o600)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return Keys{}, err
	}
	k, err = generate()
	if err != nil {
		return Keys{}, err
	}
	if err := writeFile(path, k); err != nil {
		return Keys{}, fmt.Errorf("write the embedded control plane's keys: %w", err)
	}
	return k, nil
}

// Load reads the keys from path. The error names the file and says what to do.
func Load(path string) (Keys, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return Keys{}, fmt.Errorf("read the embedded control plane's keys: %w (run as the agent's user, root)", err)
		}
		return Keys{}, fmt.Errorf("read the embedded control plane's keys: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return Keys{}, fmt.Errorf("read the embedded control plane's keys: %w", err)
	} else if !fi.Mode().IsRegular() {
		return Keys{}, fmt.Errorf("%s is not a regular file; remove it and restart the agent to make new keys", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return Keys{}, fmt.Errorf("read the embedded control plane's keys: %w", err)
	}
	if len(data) > maxFileSize {
		return Keys{}, fmt.Errorf("%s is larger than %d bytes; remove it and restart the agent to make new keys", path, maxFileSize)
	}
	k, err := parse(data)
	if err != nil {
		return Keys{}, fmt.Errorf("%s: %w; remove it and restart the agent to make new keys", path, err)
	}
	return k, nil
}

// parse reads the [berth] profile of a shared-credentials file.
func parse(data []byte) (Keys, error) {
	var k Keys
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") {
				return Keys{}, fmt.Errorf("line %d: unterminated section header", n)
			}
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return Keys{}, fmt.Errorf("line %d: want key = value", n)
		}
		if section != Profile {
			continue
		}
		switch strings.TrimSpace(name) {
		case "aws_access_key_id":
			k.AccessKeyID = strings.TrimSpace(value)
		case "aws_secret_access_key":
			k.SecretAccessKey = strings.TrimSpace(value)
		}
	}
	if err := sc.Err(); err != nil {
		return Keys{}, err
	}
	switch {
	case k.AccessKeyID == "":
		return Keys{}, fmt.Errorf("no aws_access_key_id in profile [%s]", Profile)
	case k.SecretAccessKey == "":
		return Keys{}, fmt.Errorf("no aws_secret_access_key in profile [%s]", Profile)
	}
	return k, nil
}

// generate makes a key pair shaped like AWS's: a 20-character ID and a 40-character secret, from 80
// and 240 random bits.
func generate() (Keys, error) {
	var id [10]byte
	var secret [30]byte
	if _, err := rand.Read(id[:]); err != nil {
		return Keys{}, err
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return Keys{}, err
	}
	return Keys{
		AccessKeyID:     "BKIA" + base32.StdEncoding.EncodeToString(id[:]),
		SecretAccessKey: base64.StdEncoding.EncodeToString(secret[:]),
	}, nil
}

// writeFile writes the keys to a temporary file beside path and renames it into place, so a crash
// leaves either no file or a whole one.
func writeFile(path string, k Keys) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, FileName+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	content := fmt.Sprintf("# The keys of Berth's embedded control plane. Requests signed with them can run any task\n"+
		"# on this host as root: keep this file 0600. Use: %s aws ecs ...\n"+
		"[%s]\naws_access_key_id = %s\naws_secret_access_key = %s\n", CLIHint(path), Profile, k.AccessKeyID, k.SecretAccessKey)
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(content); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
