// compose-config loads a Compose file the way `docker compose config` does (compose-go: the Compose
// specification's JSON schema, interpolation, profiles, references between services) and prints the resolved
// model as JSON. It needs no Docker engine. Exit 1 with the loader's message when the file is invalid.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	file := flag.String("f", "docker-compose.yml", "the Compose file")
	envFile := flag.String("env-file", "", "an env file for interpolation (default: .env beside the file, if present)")
	profiles := flag.String("profiles", "", "comma-separated profiles to enable")
	flag.Parse()

	abs, err := filepath.Abs(*file)
	if err != nil {
		fail(err)
	}
	opts := []cli.ProjectOptionsFn{
		cli.WithWorkingDirectory(filepath.Dir(abs)),
		cli.WithOsEnv,
		cli.WithName("roundhouse"),
	}
	if *envFile != "" {
		opts = append(opts, cli.WithEnvFiles(*envFile))
	} else {
		opts = append(opts, cli.WithEnvFiles())
	}
	opts = append(opts, cli.WithDotEnv)
	if *profiles != "" {
		opts = append(opts, cli.WithDefaultProfiles(splitComma(*profiles)...))
	}
	options, err := cli.NewProjectOptions([]string{abs}, opts...)
	if err != nil {
		fail(err)
	}
	project, err := options.LoadProject(context.Background())
	if err != nil {
		fail(err)
	}
	out, err := json.MarshalIndent(project, "", "  ")
	if err != nil {
		fail(err)
	}
	fmt.Println(string(out))
}

func splitComma(s string) []string {
	var parts []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				parts = append(parts, s[start:i])
			}
			start = i + 1
		}
	}
	return parts
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "compose-config:", err)
	os.Exit(1)
}
