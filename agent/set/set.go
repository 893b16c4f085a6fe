// Package set provides one generic set type for the whole agent. Use it instead of map[T]struct{} or
// map[T]bool so that membership, ordering and JSON output behave the same everywhere.
package set

import (
	"cmp"
	"encoding/json"
	"slices"
)

// Set is an unordered collection of distinct values. The zero value is an empty set ready to use for
// reads; Add allocates on first use. A Set is not safe for concurrent mutation.
type Set[T comparable] struct {
	m map[T]struct{}
}

// Of returns a set holding the given values.
func Of[T comparable](values ...T) Set[T] {
	s := Set[T]{m: make(map[T]struct{}, len(values))}
	for _, v := range values {
		s.m[v] = struct{}{}
	}
	return s
}

// Add inserts v; adding a value that is present already is a no-op.
func (s *Set[T]) Add(v T) {
	if s.m == nil {
		s.m = make(map[T]struct{})
	}
	s.m[v] = struct{}{}
}

// Remove deletes v; removing an absent value is a no-op.
func (s *Set[T]) Remove(v T) {
	delete(s.m, v)
}

// Has reports whether v is in the set.
func (s Set[T]) Has(v T) bool {
	_, ok := s.m[v]
	return ok
}

// Len returns the number of values in the set.
func (s Set[T]) Len() int {
	return len(s.m)
}

// Values returns the values in unspecified order; use Sorted when the order matters.
func (s Set[T]) Values() []T {
	out := make([]T, 0, len(s.m))
	for v := range s.m {
		out = append(out, v)
	}
	return out
}

// Sorted returns the values of s in ascending order.
func Sorted[T cmp.Ordered](s Set[T]) []T {
	out := s.Values()
	slices.Sort(out)
	return out
}

// MarshalJSON encodes the set as a JSON array in a stable order: sorted by each value's own encoding.
func (s Set[T]) MarshalJSON() ([]byte, error) {
	values := s.Values()
	slices.SortFunc(values, func(a, b T) int { return cmp.Compare(jsonKey(a), jsonKey(b)) })
	return json.Marshal(values)
}

// jsonKey is the sort key MarshalJSON uses: the value's JSON encoding.
func jsonKey[T comparable](v T) string {
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
