package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	cnitypes "github.com/containernetworking/cni/pkg/types"

	"github.com/berth-agent/berth/agent/set"
)

// value is one key's raw value with enough context to parse it.
type value struct {
	text string
	json bool // came from the JSON file as a non-string JSON value (number, bool, array, object)
}

// field parses a raw value into one Config field and shows the field for `berth config`. parse
// returns a warning when it corrected the value (raised it to a minimum). Errors never quote the
// value of a secret field.
type field interface {
	parse(v value) (warning string, err error)
	show() any
}

type stringField struct {
	p     *string
	oneOf []string
	fold  bool              // case-insensitive: the value is lower-cased before it is checked
	alias map[string]string // accepted spellings and the value each stands for
	abs   bool              // an absolute path, cleaned
}

func (f stringField) parse(v value) (string, error) {
	if v.json {
		return "", errors.New("must be a JSON string")
	}
	s := strings.TrimSpace(v.text)
	if strings.ContainsAny(s, "\r\n") {
		// No string key takes more than one line: this is a quoted value in the env file whose closing
		// quote is missing, and the lines it swallowed can hold credentials.
		return "", errors.New("must be a single line")
	}
	if f.fold {
		s = strings.ToLower(s)
	}
	if a, ok := f.alias[s]; ok {
		s = a
	}
	if len(f.oneOf) > 0 && !slices.Contains(f.oneOf, s) {
		return "", fmt.Errorf("%q is not one of %s", s, strings.Join(f.oneOf, ", "))
	}
	if f.abs {
		if !filepath.IsAbs(s) {
			return "", fmt.Errorf("%q is not an absolute path", s)
		}
		s = filepath.Clean(s)
	}
	*f.p = s
	return "", nil
}

func (f stringField) show() any { return *f.p }

type secretField struct{ p *Secret }

var errAuthData = errors.New("must be a JSON object (contents not shown: they hold credentials)")

func (f secretField) parse(v value) (string, error) {
	s := strings.TrimSpace(v.text)
	if s != "" {
		var obj map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &obj) != nil {
			return "", errAuthData
		}
	}
	*f.p = Secret(s)
	return "", nil
}

func (f secretField) show() any { return *f.p }

type boolField struct{ p *bool }

func (f boolField) parse(v value) (string, error) {
	b, err := strconv.ParseBool(strings.TrimSpace(v.text))
	if err != nil {
		return "", fmt.Errorf("%q is not a boolean (true or false)", v.text)
	}
	*f.p = b
	return "", nil
}

func (f boolField) show() any { return *f.p }

type intField struct {
	p        *int
	min, max int // max 0: none
}

func (f intField) parse(v value) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v.text))
	if err != nil {
		return "", fmt.Errorf("%q is not a whole number", v.text)
	}
	if f.max != 0 && n > f.max {
		return "", fmt.Errorf("%d is above the maximum %d", n, f.max)
	}
	*f.p = n
	if n < f.min {
		*f.p = f.min
		return fmt.Sprintf("%d is below the minimum %d; using %d", n, f.min, f.min), nil
	}
	return "", nil
}

func (f intField) show() any { return *f.p }

type floatField struct {
	p        *float64
	min, max float64 // max 0: none
}

func (f floatField) parse(v value) (string, error) {
	n, err := strconv.ParseFloat(strings.TrimSpace(v.text), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) {
		return "", fmt.Errorf("%q is not a number", v.text)
	}
	if f.max != 0 && n > f.max {
		return "", fmt.Errorf("%g is above the maximum %g", n, f.max)
	}
	*f.p = n
	if n < f.min {
		*f.p = f.min
		return fmt.Sprintf("%g is below the minimum %g; using %g", n, f.min, f.min), nil
	}
	return "", nil
}

func (f floatField) show() any { return *f.p }

// durationField takes Go duration text ("30s", "3h"). From the JSON file a number is accepted too,
// as nanoseconds, which is how the ECS agent's JSON config encodes durations. A value outside
// [min, max] is moved to the nearer bound with a warning (max 0: none).
type durationField struct {
	p        *time.Duration
	min, max time.Duration
}

func (f durationField) parse(v value) (string, error) {
	var d time.Duration
	if v.json {
		n, err := strconv.ParseInt(v.text, 10, 64)
		if err != nil {
			return "", fmt.Errorf("%s is not a duration (a string such as \"30s\" or a number of nanoseconds)", v.text)
		}
		d = time.Duration(n)
	} else {
		var err error
		d, err = time.ParseDuration(strings.TrimSpace(v.text))
		if err != nil {
			return "", fmt.Errorf("%q is not a duration such as 30s, 5m or 3h", v.text)
		}
	}
	*f.p = d
	if d < f.min {
		*f.p = f.min
		return fmt.Sprintf("%s is below the minimum %s; using %s", d, f.min, f.min), nil
	}
	if f.max != 0 && d > f.max {
		*f.p = f.max
		return fmt.Sprintf("%s is above the maximum %s; using %s", d, f.max, f.max), nil
	}
	return "", nil
}

func (f durationField) show() any { return f.p.String() }

// listOf splits a list value: a JSON array, or a comma-separated list. Empty items are dropped.
func listOf(v value) ([]string, error) {
	t := strings.TrimSpace(v.text)
	if strings.HasPrefix(t, "[") {
		var raw []json.RawMessage
		if err := json.Unmarshal([]byte(t), &raw); err != nil {
			return nil, fmt.Errorf("not a JSON array: %w", err)
		}
		out := make([]string, 0, len(raw))
		for i, r := range raw {
			var s string
			if err := json.Unmarshal(r, &s); err == nil {
				if s = strings.TrimSpace(s); s != "" {
					out = append(out, s)
				}
				continue
			}
			var n json.Number
			if err := json.Unmarshal(r, &n); err == nil {
				out = append(out, n.String())
				continue
			}
			return nil, fmt.Errorf("item %d is not a string or a number", i)
		}
		return out, nil
	}
	if v.json {
		return nil, errors.New("must be a JSON array or a comma-separated string")
	}
	var out []string
	for _, s := range strings.Split(t, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

type setField struct {
	p     *set.Set[string]
	check func(string) error
}

func (f setField) parse(v value) (string, error) {
	items, err := listOf(v)
	if err != nil {
		return "", err
	}
	var s set.Set[string]
	for _, it := range items {
		if f.check != nil {
			if err := f.check(it); err != nil {
				return "", err
			}
		}
		s.Add(it)
	}
	*f.p = s
	return "", nil
}

func (f setField) show() any { return set.Sorted(*f.p) }

// rateField is "steady,burst": two positive whole numbers, as the ECS agent takes them.
type rateField struct{ steady, burst *int }

func (f rateField) parse(v value) (string, error) {
	s := strings.TrimSpace(v.text)
	a, b, ok := strings.Cut(s, ",")
	steady, err1 := strconv.Atoi(strings.TrimSpace(a))
	burst, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || steady < 1 || burst < 1 || steady > 1_000_000 || burst > 1_000_000 {
		return "", fmt.Errorf("%q is not \"steady,burst\": two whole numbers from 1 to 1000000", s)
	}
	*f.steady, *f.burst = steady, burst
	return "", nil
}

func (f rateField) show() any { return fmt.Sprintf("%d,%d", *f.steady, *f.burst) }

// portRangeField is a range of ports, "first-last"; empty leaves it zero.
type portRangeField struct{ p *[2]int }

func (f portRangeField) parse(v value) (string, error) {
	s := strings.TrimSpace(v.text)
	if s == "" {
		*f.p = [2]int{}
		return "", nil
	}
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || lo < 1 || hi > 65535 || lo > hi {
		return "", fmt.Errorf("%q is not a port range such as 49153-65535", s)
	}
	*f.p = [2]int{lo, hi}
	return "", nil
}

func (f portRangeField) show() any {
	if *f.p == [2]int{} {
		return ""
	}
	return fmt.Sprintf("%d-%d", f.p[0], f.p[1])
}

var accountID = regexp.MustCompile(`^[0-9]{12}$`)

func checkAccount(s string) error {
	if !accountID.MatchString(s) {
		return fmt.Errorf("%q is not a 12-digit AWS account ID (write IDs as strings to keep leading zeros)", s)
	}
	return nil
}

var regionName = regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)

func checkRegion(s string) error {
	if !regionName.MatchString(s) {
		return fmt.Errorf("%q is not an AWS region name such as us-east-1", s)
	}
	return nil
}

func checkVendor(s string) error {
	if s != RegistryECR {
		return fmt.Errorf("unknown registry vendor %q (known: %s)", s, RegistryECR)
	}
	return nil
}

// ecrRegionsField distinguishes unset (the key has no value in any source) from set-to-empty.
type ecrRegionsField struct{ p *ECRRegions }

func (f ecrRegionsField) parse(v value) (string, error) {
	var regions set.Set[string]
	if _, err := (setField{p: &regions, check: checkRegion}).parse(v); err != nil {
		return "", err
	}
	*f.p = ECRRegions{Configured: true, Regions: regions}
	return "", nil
}

func (f ecrRegionsField) show() any {
	if !f.p.Configured {
		return "(detected region)"
	}
	return set.Sorted(f.p.Regions)
}

type portsField struct{ p *[]uint16 }

func (f portsField) parse(v value) (string, error) {
	items, err := listOf(v)
	if err != nil {
		return "", err
	}
	ports := make([]uint16, 0, len(items))
	for _, it := range items {
		n, err := strconv.ParseUint(it, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Errorf("%q is not a port number (1-65535)", it)
		}
		if !slices.Contains(ports, uint16(n)) {
			ports = append(ports, uint16(n))
		}
	}
	slices.Sort(ports)
	*f.p = ports
	return "", nil
}

func (f portsField) show() any { return *f.p }

type cidrListField struct{ p *[]cnitypes.IPNet }

func (f cidrListField) parse(v value) (string, error) {
	items, err := listOf(v)
	if err != nil {
		return "", err
	}
	routes := make([]cnitypes.IPNet, 0, len(items))
	for _, it := range items {
		n, err := cnitypes.ParseCIDR(it)
		if err != nil {
			return "", fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8", it)
		}
		routes = append(routes, cnitypes.IPNet(*n))
	}
	*f.p = routes
	return "", nil
}

func (f cidrListField) show() any {
	out := make([]string, len(*f.p))
	for i, n := range *f.p {
		out[i] = (&net.IPNet{IP: n.IP, Mask: n.Mask}).String()
	}
	return out
}

// staticAddrField is an IPv4 address with its prefix length, e.g. 169.254.172.10/22: the address
// itself, not the network, and neither the network nor the broadcast address of its prefix.
type staticAddrField struct{ p **cnitypes.IPNet }

func (f staticAddrField) parse(v value) (string, error) {
	t := strings.TrimSpace(v.text)
	if t == "" {
		*f.p = nil
		return "", nil
	}
	ip, network, err := net.ParseCIDR(t)
	if err != nil {
		return "", fmt.Errorf("%q is not an IPv4 address with a prefix length, such as 169.254.172.10/22", t)
	}
	ip4 := ip.To4()
	if ip4 == nil {
		return "", fmt.Errorf("%q is not an IPv4 address", t)
	}
	ones, bits := network.Mask.Size()
	if bits != 32 {
		return "", fmt.Errorf("%q is not an IPv4 address", t)
	}
	if ones < 31 {
		broadcast := make(net.IP, 4)
		for i := range broadcast {
			broadcast[i] = network.IP.To4()[i] | ^network.Mask[i]
		}
		switch {
		case ip4.Equal(network.IP):
			return "", fmt.Errorf("%q is the network address of its prefix; use a host address", t)
		case ip4.Equal(broadcast):
			return "", fmt.Errorf("%q is the broadcast address of its prefix; use a host address", t)
		}
	}
	*f.p = &cnitypes.IPNet{IP: ip4, Mask: network.Mask}
	return "", nil
}

func (f staticAddrField) show() any {
	if *f.p == nil {
		return nil
	}
	return (&net.IPNet{IP: (*f.p).IP, Mask: (*f.p).Mask}).String()
}

type attributesField struct{ p *map[string]string }

func (f attributesField) parse(v value) (string, error) {
	t := strings.TrimSpace(v.text)
	if t == "" {
		*f.p = map[string]string{}
		return "", nil
	}
	attrs := map[string]string{}
	if err := json.Unmarshal([]byte(t), &attrs); err != nil {
		return "", fmt.Errorf("must be a JSON object of strings: %w", err)
	}
	*f.p = attrs
	return "", nil
}

func (f attributesField) show() any { return *f.p }

// tagsField is a JSON object of string tags with the ECS limits: keys of 1 to 128 characters,
// values of at most 256.
type tagsField struct{ p *map[string]string }

func (f tagsField) parse(v value) (string, error) {
	var tags map[string]string
	if _, err := (attributesField{p: &tags}).parse(v); err != nil {
		return "", err
	}
	for k, val := range tags {
		if n := len([]rune(k)); n < 1 || n > 128 {
			return "", fmt.Errorf("tag key %q must have 1 to 128 characters", k)
		}
		if len([]rune(val)) > 256 {
			return "", fmt.Errorf("the value of tag %q has more than 256 characters", k)
		}
	}
	*f.p = tags
	return "", nil
}

func (f tagsField) show() any { return *f.p }

// subnetField is an IPv4 network in CIDR form, such as 172.31.250.0/24.
type subnetField struct{ p *cnitypes.IPNet }

func (f subnetField) parse(v value) (string, error) {
	t := strings.TrimSpace(v.text)
	ip, network, err := net.ParseCIDR(t)
	if err != nil || ip.To4() == nil {
		return "", fmt.Errorf("%q is not an IPv4 subnet such as 172.31.250.0/24", t)
	}
	if ones, _ := network.Mask.Size(); ones > 30 {
		return "", fmt.Errorf("%q is too small for tasks: use a prefix of /30 or shorter", t)
	}
	*f.p = cnitypes.IPNet{IP: network.IP.To4(), Mask: network.Mask}
	return "", nil
}

func (f subnetField) show() any { return (&net.IPNet{IP: f.p.IP, Mask: f.p.Mask}).String() }

// listField is an ordered list of distinct strings, each checked.
type listField struct {
	p     *[]string
	check func(string) error
}

func (f listField) parse(v value) (string, error) {
	items, err := listOf(v)
	if err != nil {
		return "", err
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		if f.check != nil {
			if err := f.check(it); err != nil {
				return "", err
			}
		}
		if !slices.Contains(out, it) {
			out = append(out, it)
		}
	}
	*f.p = out
	return "", nil
}

func (f listField) show() any { return *f.p }

// loggingDrivers returns the Docker logging drivers ECS knows.
func loggingDrivers() []string {
	return []string{"json-file", "syslog", "journald", "gelf", "fluentd", "awslogs", "splunk",
		"logentries", "sumologic", "awsfirelens", "none"}
}

func checkLoggingDriver(s string) error {
	if !slices.Contains(loggingDrivers(), s) {
		return fmt.Errorf("unknown logging driver %q (known: %s)", s, strings.Join(loggingDrivers(), ", "))
	}
	return nil
}
