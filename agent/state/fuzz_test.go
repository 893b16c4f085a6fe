package state

import (
	"bytes"
	"errors"
	"regexp"
	"testing"
)

// recordErrorText is every form a RecordError's text may take: the bucket and key, then a
// description of the problem that quotes nothing from the record but, for a type error, the path of
// the field.
var recordErrorText = regexp.MustCompile(`(?s)^bad (tasks|sent) record ".*": (invalid JSON at offset \d+|field ".*": want [\w.\[\]*]+|` +
	`a time is not in RFC 3339 format|not an integer in range|a value does not decode|key does not match the (task's|record's task) ARN)$`)

// FuzzDecodeTask decodes a task record as Tasks reads it from bbolt (the key and the value of one
// entry of the tasks bucket). It checks that nothing panics; that a record that does not decode
// gives a *RecordError naming the bucket and key and quoting nothing else of the record; and that one
// that decodes holds the key as its ARN and re-encodes to a record that decodes to the same encoding.
func FuzzDecodeTask(f *testing.F) {
	full, err := encodeTask(fullTask("arn:a"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("arn:a", full)
	for _, s := range []string{
		`{"arn": "arn:a"}`, `{"arn": "arn:b"}`, `null`, ``, `{"arn": "arn:a", "knownStatus": "BOGUS"}`,
		`{"arn": "arn:a", "containers": [null, {"startedAt": "SECRET-NOT-A-TIME"}]}`,
		`{"arn": "arn:a", "containers": [{"memory": 17592186044416, "cpu": -1, "portMappings": [{"hostPort": 70000}]}]}`,
		`{"arn": "arn:a", "eni": {"ipv4Cidr": "not a prefix", "gateway": "x"}}`,
		`{"arn": "arn:a", "containers": [{"dockerLabels": {"k": 1}, "stopTimeout": 1e400}]}`,
	} {
		f.Add("arn:a", []byte(s))
	}
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		tk, err := decodeTask(key, data)
		if err != nil {
			checkRecordError(t, err, bucketTasks, key)
			return
		}
		if tk.Arn != key {
			t.Fatalf("record under key %q decoded with ARN %q", key, tk.Arn)
		}
		if key == "" {
			return // encodeTask refuses an empty ARN, which no saved record has
		}
		enc, err := encodeTask(tk)
		if err != nil {
			t.Fatalf("decoded task does not encode: %v", err)
		}
		back, err := decodeTask(key, enc)
		if err != nil {
			t.Fatalf("re-encoded task does not decode: %v\n%s", err, enc)
		}
		if enc2, err := encodeTask(back); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable over a round trip (%v):\n%s\n%s", err, enc, enc2)
		}
	})
}

// FuzzDecodeSent does for sent records, which may carry a whole task as a report, what
// FuzzDecodeTask does for task records.
func FuzzDecodeSent(f *testing.F) {
	full, err := encodeSent(SentRecord{TaskArn: "arn:a", Report: fullTask("arn:a")})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("arn:a", full)
	for _, s := range []string{
		`{"taskArn": "arn:a", "task": "RUNNING", "containers": {"app": "STOPPED"}}`,
		`{"taskArn": "arn:a", "containers": {"app": "NOPE"}}`, `{"taskArn": "arn:a", "report": {"arn": "arn:b"}}`, `[]`,
	} {
		f.Add("arn:a", []byte(s))
	}
	f.Fuzz(func(t *testing.T, key string, data []byte) {
		r, err := decodeSent(key, data)
		if err != nil {
			checkRecordError(t, err, bucketSent, key)
			return
		}
		if r.TaskArn != key {
			t.Fatalf("record under key %q decoded with task ARN %q", key, r.TaskArn)
		}
		enc, err := encodeSent(r)
		if err != nil {
			return // an empty key, or a report of another task: decodable, but never saved
		}
		back, err := decodeSent(key, enc)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v\n%s", err, enc)
		}
		if enc2, err := encodeSent(back); err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not stable over a round trip (%v):\n%s\n%s", err, enc, enc2)
		}
	})
}

func checkRecordError(t *testing.T, err error, bucket, key string) {
	t.Helper()
	var re *RecordError
	if !errors.As(err, &re) || re.Bucket != bucket || re.Key != key || re.Err == nil {
		t.Fatalf("error %v (%T) is not a *RecordError for %s %q", err, err, bucket, key)
	}
	if !recordErrorText.MatchString(err.Error()) {
		t.Fatalf("error text %q is not one of the forms that quote nothing of the record", err.Error())
	}
}
