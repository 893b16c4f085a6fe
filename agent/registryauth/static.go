package registryauth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	docker "github.com/fsouza/go-dockerclient"
)

// The values of ECS_ENGINE_AUTH_TYPE.
const (
	AuthTypeDocker    = "docker"
	AuthTypeDockercfg = "dockercfg"
)

// dockerEntry is one registry of ECS_ENGINE_AUTH_TYPE=docker data.
type dockerEntry struct {
	Username string `json:"username"`
	Password string `json:"password"`
	Email    string `json:"email"`
}

// dockercfgEntry is one registry of ECS_ENGINE_AUTH_TYPE=dockercfg data.
type dockercfgEntry struct {
	Auth  string `json:"auth"`
	Email string `json:"email"`
}

// authDataError builds a parse error of the engine auth data. It must never be given any part of
// the data except registry keys and JSON field names.
func authDataError(authType, format string, args ...any) error {
	return fmt.Errorf("%w: ECS_ENGINE_AUTH_DATA (type %s): %s", ErrInvalidConfig, authType, fmt.Sprintf(format, args...))
}

// parseStaticAuth parses the engine auth data into credentials per normalised registry host.
// Errors name the registry key and the JSON field, never a value.
func parseStaticAuth(authType, data string) (map[string]docker.AuthConfiguration, error) {
	if strings.TrimSpace(data) == "" {
		return nil, nil
	}
	switch authType {
	case AuthTypeDocker, AuthTypeDockercfg:
	case "":
		return nil, fmt.Errorf("%w: ECS_ENGINE_AUTH_DATA is set but ECS_ENGINE_AUTH_TYPE is not (want %s or %s)",
			ErrInvalidConfig, AuthTypeDocker, AuthTypeDockercfg)
	default:
		return nil, fmt.Errorf("%w: ECS_ENGINE_AUTH_TYPE %q is not %s or %s", ErrInvalidConfig, authType, AuthTypeDocker, AuthTypeDockercfg)
	}

	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &raw); err != nil {
		var syntaxErr *json.SyntaxError
		if errors.As(err, &syntaxErr) {
			return nil, authDataError(authType, "not valid JSON (error at byte offset %d)", syntaxErr.Offset)
		}
		return nil, authDataError(authType, "not a JSON object of registries")
	}

	out := make(map[string]docker.AuthConfiguration, len(raw))
	from := make(map[string]string, len(raw)) // normalised host -> key it came from
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic errors
	for _, key := range keys {
		host := normaliseRegistryKey(key)
		if host == "" {
			return nil, authDataError(authType, "registry key %q names no registry host", key)
		}
		if prev, dup := from[host]; dup {
			return nil, authDataError(authType, "registry keys %q and %q name the same registry %s", prev, key, host)
		}
		auth, err := parseEntry(authType, key, raw[key])
		if err != nil {
			return nil, err
		}
		auth.ServerAddress = host
		if host == dockerHub {
			auth.ServerAddress = dockerHubServerAddress
		}
		out[host] = auth
		from[host] = key
	}
	return out, nil
}

// parseEntry parses the credentials of one registry key.
func parseEntry(authType, key string, raw json.RawMessage) (docker.AuthConfiguration, error) {
	fieldErr := func(err error) error {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return authDataError(authType, "registry %q: field %q must be a %s", key, typeErr.Field, typeErr.Type)
		}
		return authDataError(authType, "registry %q: not a JSON object of credentials", key)
	}
	switch authType {
	case AuthTypeDocker:
		var e dockerEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return docker.AuthConfiguration{}, fieldErr(err)
		}
		if e.Username == "" {
			return docker.AuthConfiguration{}, authDataError(authType, "registry %q: \"username\" is missing", key)
		}
		return docker.AuthConfiguration{Username: e.Username, Password: e.Password, Email: e.Email}, nil
	default: // AuthTypeDockercfg
		var e dockercfgEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return docker.AuthConfiguration{}, fieldErr(err)
		}
		if e.Auth == "" {
			return docker.AuthConfiguration{}, authDataError(authType, "registry %q: \"auth\" is missing", key)
		}
		user, pass, err := decodeUserPass(e.Auth)
		if err != nil {
			return docker.AuthConfiguration{}, authDataError(authType, "registry %q: \"auth\" %v", key, err)
		}
		return docker.AuthConfiguration{Username: user, Password: pass, Email: e.Email}, nil
	}
}

// decodeUserPass decodes base64("user:password"). Its errors never contain the input.
func decodeUserPass(s string) (user, pass string, err error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return "", "", errors.New("is not valid base64")
	}
	user, pass, ok := strings.Cut(string(b), ":")
	if !ok || user == "" {
		return "", "", errors.New("does not decode to user:password")
	}
	return user, pass, nil
}
