package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseECSRounds(t *testing.T) {
	got, err := parseECSRounds("1:15, 20:8,200:2")
	require.NoError(t, err)
	assert.Equal(t, []ecsSize{{1, 15}, {20, 8}, {200, 2}}, got)
	for _, bad := range []string{"", "20", "20:", "0:3", "20:0", "x:1", "1:15,,2:2"} {
		_, err := parseECSRounds(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseSteady(t *testing.T) {
	got, err := parseSteady("50, 200")
	require.NoError(t, err)
	assert.Equal(t, steadySizes{idle: 50, loaded: 200}, got)
	got, err = parseSteady("5,5")
	require.NoError(t, err)
	assert.Equal(t, steadySizes{idle: 5, loaded: 5}, got)
	for _, bad := range []string{"", "50", "0,10", "10,5", "a,b", "1,2,3"} {
		_, err := parseSteady(bad)
		assert.ErrorContains(t, err, "-ecs-steady", bad)
	}
}

func TestEnvValueTakesTheLastSetting(t *testing.T) {
	env := []string{"A=1", "ECS_X=first", "ECS_XY=no", "ECS_X=second"}
	assert.Equal(t, "second", envValue(env, "ECS_X"))
	assert.Equal(t, "", envValue(env, "ECS"))
}
