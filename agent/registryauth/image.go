package registryauth

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/berth-agent/berth/agent/set"
)

// dockerHub is the one name every Docker Hub alias is normalised to.
const dockerHub = "docker.io"

// dockerHubServerAddress is the server address Docker clients use for Docker Hub credentials.
const dockerHubServerAddress = "https://index.docker.io/v1/"

// dockerHubAliases are the host names that all mean Docker Hub.
var dockerHubAliases = set.Of("docker.io", "index.docker.io", "registry-1.docker.io", "registry.hub.docker.com")

// normaliseHost lower-cases a registry host and folds the Docker Hub aliases into one name.
func normaliseHost(host string) string {
	host = strings.ToLower(host)
	if dockerHubAliases.Has(host) {
		return dockerHub
	}
	return host
}

// normaliseRegistryKey turns a key of the engine auth data ("https://index.docker.io/v1/",
// "http://host:5000", "host:5000/") into the normalised host[:port] form that registryHost returns.
func normaliseRegistryKey(key string) string {
	k := strings.TrimSpace(key)
	lower := strings.ToLower(k)
	for _, scheme := range []string{"https://", "http://"} {
		if strings.HasPrefix(lower, scheme) {
			k = k[len(scheme):]
			break
		}
	}
	if i := strings.IndexByte(k, '/'); i >= 0 {
		k = k[:i]
	}
	return normaliseHost(k)
}

// registryHost returns the normalised registry host of an image reference
// ([host[:port]/]path[:tag][@digest]): the part before the first "/" when it contains "." or ":" or
// is "localhost", Docker Hub otherwise.
func registryHost(image string) (string, error) {
	name := image
	if i := strings.IndexByte(name, '@'); i >= 0 {
		name = name[:i]
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		return "", fmt.Errorf("image %q: %w", image, errInvalidReference)
	}
	i := strings.IndexByte(name, '/')
	if i < 0 {
		return dockerHub, nil
	}
	first := name[:i]
	if first == "" || i == len(name)-1 {
		return "", fmt.Errorf("image %q: %w", image, errInvalidReference)
	}
	if strings.ContainsAny(first, ".:") || first == "localhost" {
		return normaliseHost(first), nil
	}
	return dockerHub, nil
}

// ecrHostPattern matches <12-digit account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn][:port].
var ecrHostPattern = regexp.MustCompile(`^([0-9]{12})\.dkr\.ecr(-fips)?\.([a-z]{2}(?:-[a-z0-9]+)+-[0-9]+)\.amazonaws\.com(\.cn)?(?::[0-9]{1,5})?$`)

// ParseECRHost reports whether host (a registry host, optionally with ":port") is an Amazon ECR
// private registry, and if so its account, region and whether it is a FIPS endpoint. It is
// case-insensitive and does no I/O.
func ParseECRHost(host string) (account, region string, fips bool, ok bool) {
	m := ecrHostPattern.FindStringSubmatch(strings.ToLower(host))
	if m == nil {
		return "", "", false, false
	}
	return m[1], m[3], m[2] != "", true
}

// ecrRegistry is an ECR registry named by an image's host.
type ecrRegistry struct {
	account string
	region  string
	fips    bool
}

// parseECR is ParseECRHost returning an ecrRegistry.
func parseECR(host string) (ecrRegistry, bool) {
	account, region, fips, ok := ParseECRHost(host)
	return ecrRegistry{account: account, region: region, fips: fips}, ok
}
