// Command dockersuite runs docker-credential-helpers' reference client (the vendored `client` and
// `credentials` packages: the code docker's CLI talks to a credential helper with) against a real
// helper program, with the cases of that repository's own tests that a storing helper must meet:
// client/client_test.go, credentials/credentials_test.go, pass/pass_test.go,
// osxkeychain/osxkeychain_test.go, registryurl/parse_test.go, and what docker's CLI does with the
// client (cli/config/credentials/native_store.go). The reference tests run the client against a
// mock program or call a helper's Go methods; here every call goes through
// client.NewShellProgramFunc to the helper's binary, as docker runs it.
//
// Usage: dockersuite [HELPER]
//
// HELPER (default docker-credential-vault) is looked up on PATH, as docker looks up
// docker-credential-NAME. The helper's store must hold no credentials at the start; the suite
// erases what it stores. It prints one line per case, "ok N - NAME" or "not ok N - NAME: WHY",
// then "# passed P of T" (or "# failed F of T") and exits 1 when a case failed.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/docker/docker-credential-helpers/client"
	"github.com/docker/docker-credential-helpers/credentials"
)

// The servers of client/client_test.go.
const (
	validServerAddress   = "https://registry.example.com/v1"
	validUsername        = "linus"
	validServerAddress2  = "https://example.com:5002"
	invalidServerAddress = "https://foobar.example.com"
	missingCredsAddress  = "https://missing.example.com/v1"
)

type suite struct {
	helper  string
	program client.ProgramFunc
	total   int
	failed  int
}

// check runs one case and prints its line.
func (s *suite) check(name string, run func() error) {
	s.total++
	if err := run(); err != nil {
		s.failed++
		fmt.Printf("not ok %d - %s: %s\n", s.total, name, strings.ReplaceAll(err.Error(), "\n", `\n`))
		return
	}
	fmt.Printf("ok %d - %s\n", s.total, name)
}

func (s *suite) store(url, username, secret string) error {
	if err := client.Store(s.program, &credentials.Credentials{ServerURL: url, Username: username, Secret: secret}); err != nil {
		return fmt.Errorf("store %q: %v", url, err)
	}
	return nil
}

// expectGet asks for url and wants username and secret back, with the ServerURL asked for.
func (s *suite) expectGet(url, username, secret string) error {
	c, err := client.Get(s.program, url)
	if err != nil {
		return fmt.Errorf("get %q: %v", url, err)
	}
	if c.Username != username || c.Secret != secret || c.ServerURL != url {
		return fmt.Errorf("get %q: got %q/%q for %q, want %q/%q", url, c.Username, c.Secret, c.ServerURL, username, secret)
	}
	return nil
}

// expectNotFound wants the error docker takes for "no such entry" from get.
func (s *suite) expectNotFound(url string) error {
	c, err := client.Get(s.program, url)
	if !credentials.IsErrCredentialsNotFound(err) {
		if err == nil {
			return fmt.Errorf("get %q: gave %q/%q, want credentials not found", url, c.Username, c.Secret)
		}
		return fmt.Errorf("get %q: %v, want credentials not found", url, err)
	}
	return nil
}

func (s *suite) erase(url string) error {
	if err := client.Erase(s.program, url); err != nil {
		return fmt.Errorf("erase %q: %v", url, err)
	}
	return nil
}

// forget erases url when it is stored (clean-up, as the reference tests do it).
func (s *suite) forget(urls ...string) {
	for _, u := range urls {
		_ = client.Erase(s.program, u)
	}
}

// expectListed wants every server of want listed with its username.
func (s *suite) expectListed(want map[string]string) error {
	got, err := client.List(s.program)
	if err != nil {
		return fmt.Errorf("list: %v", err)
	}
	for url, username := range want {
		if u, ok := got[url]; !ok || u != username {
			return fmt.Errorf("list: %q is %q (listed: %t), want %q; listed %v", url, u, ok, username, got)
		}
	}
	return nil
}

// expectNotListed wants none of urls listed.
func (s *suite) expectNotListed(urls ...string) error {
	got, err := client.List(s.program)
	if err != nil {
		return fmt.Errorf("list: %v", err)
	}
	for _, url := range urls {
		if _, ok := got[url]; ok {
			return fmt.Errorf("list: %q is listed: %v", url, got)
		}
	}
	return nil
}

// wrapped is the error client.Store, Get and Erase return when the helper printed one of the
// protocol's input errors: what the reference client_test.go expects for a missing server URL.
func wrapped(verb string, protocolError error) string {
	return fmt.Sprintf("error %s credentials - err: %s, out: `%s`", verb, protocolError, protocolError)
}

func expectError(what string, err error, want string) error {
	if err == nil {
		return fmt.Errorf("%s: no error, want `%s`", what, want)
	}
	if err.Error() != want {
		return fmt.Errorf("%s: error `%v`, want `%s`", what, err, want)
	}
	return nil
}

// raw runs the helper with args and input through the reference ProgramFunc, for what the client
// has no function for (version, flags, input the client would never write); it returns stdout and
// the exit status.
func (s *suite) raw(input string, args ...string) (string, int, error) {
	p := s.program(args...)
	p.Input(strings.NewReader(input))
	out, err := p.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0, nil
	case errors.As(err, &exit):
		return string(out), exit.ExitCode(), nil
	default:
		return string(out), -1, err
	}
}

// expectExit runs the helper and wants the exit status code with a non-empty answer on stdout.
func (s *suite) expectExit(code int, input string, args ...string) (string, error) {
	out, status, err := s.raw(input, args...)
	if err != nil {
		return out, fmt.Errorf("%v: %v", args, err)
	}
	if status != code || strings.TrimSpace(out) == "" {
		return out, fmt.Errorf("%v: exit %d with `%s`, want exit %d and a message on stdout", args, status, strings.TrimSpace(out), code)
	}
	return out, nil
}

func all(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func main() {
	helper := "docker-credential-vault"
	if len(os.Args) > 1 {
		helper = os.Args[1]
	}
	s := &suite{helper: helper, program: client.NewShellProgramFunc(helper)}

	// credentials/credentials_test.go, TestList: the listing is a JSON object (the store is empty).
	s.check("credentials_test TestList: list of an empty store is an empty JSON object", func() error {
		got, err := client.List(s.program)
		if err != nil {
			return fmt.Errorf("list: %v", err)
		}
		if len(got) != 0 {
			return fmt.Errorf("list: %v, want nothing (the store must be empty at the start)", got)
		}
		return nil
	})

	// client/client_test.go: TestStore, TestGet, TestList, TestErase.
	s.check("client_test TestStore: "+validServerAddress+" foo/bar", func() error {
		return s.store(validServerAddress, "foo", "bar")
	})
	s.check("client_test TestStore: identity token <token>/abcd1234 for "+validServerAddress2, func() error {
		return s.store(validServerAddress2, "<token>", "abcd1234")
	})
	s.check("client_test TestGet: "+validServerAddress+" gives foo/bar", func() error {
		return s.expectGet(validServerAddress, "foo", "bar")
	})
	s.check("client_test TestGet: "+validServerAddress2+" gives the identity token", func() error {
		return s.expectGet(validServerAddress2, "<token>", "abcd1234")
	})
	s.check("client_test TestGet: "+missingCredsAddress+" is ErrCredentialsNotFound", func() error {
		_, err := client.Get(s.program, missingCredsAddress)
		return all(s.expectNotFound(missingCredsAddress),
			expectError("get", err, credentials.NewErrCredentialsNotFound().Error()))
	})
	s.check("client_test TestGet: no server URL is the missing server URL error", func() error {
		_, err := client.Get(s.program, "")
		return expectError("get \"\"", err, wrapped("getting", credentials.NewErrCredentialsMissingServerURL()))
	})
	s.check("client_test TestList: each stored server with its username", func() error {
		return s.expectListed(map[string]string{validServerAddress: "foo", validServerAddress2: "<token>"})
	})
	s.check("client_test TestErase: "+validServerAddress, func() error {
		return s.erase(validServerAddress)
	})
	s.check("client_test TestErase: "+invalidServerAddress+" (never stored) fails as not found", func() error {
		err := client.Erase(s.program, invalidServerAddress)
		return expectError("erase", err, "error erasing credentials - err: exit status 1, out: `"+credentials.NewErrCredentialsNotFound().Error()+"`")
	})
	s.check("client_test TestErase: get after erase is ErrCredentialsNotFound, the other server stays", func() error {
		return all(s.expectNotFound(validServerAddress), s.expectGet(validServerAddress2, "<token>", "abcd1234"),
			s.expectNotListed(validServerAddress))
	})
	s.check("client_test ExampleStore/ExampleGet: a secret with spaces, user exampleuser", func() error {
		const url = "https://registry.example.com"
		defer s.forget(url)
		return all(s.store(url, "exampleuser", "my super secret token"), s.expectGet(url, "exampleuser", "my super secret token"))
	})

	// credentials/credentials_test.go: the helper side of the protocol, through the client.
	const v1 = "https://registry.example.com/v1/"
	s.check("credentials_test TestStore/TestGet: "+v1+" foo/bar", func() error {
		return all(s.store(v1, "foo", "bar"), s.expectGet(v1, "foo", "bar"))
	})
	s.check("credentials_test TestStoreMissingServerURL", func() error {
		err := client.Store(s.program, &credentials.Credentials{Username: "foo", Secret: "bar"})
		return all(expectError("store", err, wrapped("storing", credentials.NewErrCredentialsMissingServerURL())),
			s.expectNotListed(""))
	})
	s.check("credentials_test TestStoreMissingUsername", func() error {
		const url = "https://nouser.example.com/v1/"
		err := client.Store(s.program, &credentials.Credentials{ServerURL: url, Secret: "bar"})
		return all(expectError("store", err, wrapped("storing", credentials.NewErrCredentialsMissingUsername())),
			s.expectNotListed(url))
	})
	s.check("credentials_test TestGetMissingServerURL: white space only", func() error {
		_, err := client.Get(s.program, " \n")
		return expectError("get", err, wrapped("getting", credentials.NewErrCredentialsMissingServerURL()))
	})
	s.check("credentials_test TestErase: get after erase of "+v1+" fails", func() error {
		return all(s.erase(v1), s.expectNotFound(v1))
	})
	s.check("credentials_test TestEraseMissingServerURL", func() error {
		err := client.Erase(s.program, "")
		return expectError("erase \"\"", err, wrapped("erasing", credentials.NewErrCredentialsMissingServerURL()))
	})
	s.check("credentials Store: field names in any case, as encoding/json reads them", func() error {
		const url = "https://case.example.com"
		defer s.forget(url)
		out, status, err := s.raw(`{"serverurl":"`+url+`","USERNAME":"u","secret":"s"}`, credentials.ActionStore)
		if err != nil || status != 0 {
			return fmt.Errorf("store: exit %d, %v: `%s`", status, err, strings.TrimSpace(out))
		}
		return s.expectGet(url, "u", "s")
	})
	s.check("credentials Store: no Secret is an empty secret", func() error {
		const url = "https://nosecret.example.com"
		defer s.forget(url)
		out, status, err := s.raw(`{"ServerURL":"`+url+`","Username":"u"}`, credentials.ActionStore)
		if err != nil || status != 0 {
			return fmt.Errorf("store: exit %d, %v: `%s`", status, err, strings.TrimSpace(out))
		}
		return s.expectGet(url, "u", "")
	})
	s.check("credentials Store: input that is not JSON fails, not as an input error", func() error {
		out, err := s.expectExit(1, "not json", credentials.ActionStore)
		if err != nil {
			return err
		}
		if credentials.IsCredentialsMissingServerURLMessage(out) || credentials.IsCredentialsMissingUsernameMessage(out) ||
			credentials.IsErrCredentialsNotFoundMessage(out) {
			return fmt.Errorf("store of `not json` answered `%s`", strings.TrimSpace(out))
		}
		return nil
	})
	s.check("credentials Get: the answer is one JSON object with ServerURL, Username, Secret", func() error {
		out, status, err := s.raw(validServerAddress2, credentials.ActionGet)
		if err != nil || status != 0 {
			return fmt.Errorf("get: exit %d, %v: `%s`", status, err, strings.TrimSpace(out))
		}
		var answer map[string]string
		if err := json.Unmarshal([]byte(out), &answer); err != nil {
			return fmt.Errorf("get: `%s` is not one JSON object of strings: %v", strings.TrimSpace(out), err)
		}
		want := map[string]string{"ServerURL": validServerAddress2, "Username": "<token>", "Secret": "abcd1234"}
		for k, v := range want {
			if answer[k] != v {
				return fmt.Errorf("get: %s is %q, want %q (answer `%s`)", k, answer[k], v, strings.TrimSpace(out))
			}
		}
		return nil
	})
	versionLine := regexp.MustCompile(`^` + regexp.QuoteMeta(filepath.Base(helper)) + ` \([^()\n]+\) \S+\n$`)
	s.check("credentials HandleCommand: version prints NAME (PACKAGE) VERSION", func() error {
		out, status, err := s.raw("", credentials.ActionVersion)
		if err != nil || status != 0 || !versionLine.MatchString(out) {
			return fmt.Errorf("version: exit %d, %v: `%s`", status, err, out)
		}
		return nil
	})
	s.check("credentials Serve: --version and -v print the version", func() error {
		for _, flag := range []string{"--version", "-v"} {
			out, status, err := s.raw("", flag)
			if err != nil || status != 0 || !versionLine.MatchString(out) {
				return fmt.Errorf("%s: exit %d, %v: `%s`", flag, status, err, out)
			}
		}
		return nil
	})
	s.check("credentials Serve: --help and -h print the usage, exit 0", func() error {
		for _, flag := range []string{"--help", "-h"} {
			if _, err := s.expectExit(0, "", flag); err != nil {
				return err
			}
		}
		return nil
	})
	s.check("credentials Serve: no action prints the usage, exit 1", func() error {
		_, err := s.expectExit(1, "")
		return err
	})
	s.check("credentials Serve: two arguments print the usage, exit 1", func() error {
		_, err := s.expectExit(1, validServerAddress2, credentials.ActionGet, "extra")
		return err
	})
	s.check("credentials HandleCommand: an unknown action fails, exit 1", func() error {
		_, err := s.expectExit(1, "", "frobnicate")
		return err
	})

	// pass/pass_test.go: a helper that stores, run through the client.
	s.check("pass_test TestPassHelper: https://foobar.example.com:2376/v1 store, get, erase, not found", func() error {
		const url = "https://foobar.example.com:2376/v1"
		return all(s.store(url, "nothing", "isthebestmeshuggahalbum"), s.expectGet(url, "nothing", "isthebestmeshuggahalbum"),
			s.erase(url), s.expectNotFound(url))
	})
	s.check("pass_test TestPassHelperList: two ports listed, each gets back and is erased", func() error {
		const a, b = "https://foobar.example.com:2376/v1", "https://foobar.example.com:2375/v1"
		if err := all(s.store(a, "foo", "isthebestmeshuggahalbum"), s.store(b, "bar", "isthebestmeshuggahalbum"),
			s.expectListed(map[string]string{a: "foo", b: "bar"})); err != nil {
			return err
		}
		for url, username := range map[string]string{a: "foo", b: "bar"} {
			if err := all(s.expectGet(url, username, "isthebestmeshuggahalbum"), s.erase(url), s.expectNotFound(url)); err != nil {
				return err
			}
		}
		return s.expectNotListed(a, b)
	})
	s.check("pass_test TestPassHelperWithEmptyServer: https://index.example.com/v1//access-token is not found", func() error {
		const url = "https://myreqistry.example.com:2375/v1"
		defer s.forget(url)
		return all(s.store(url, "foo", "isthebestmeshuggahalbum"), s.expectNotFound("https://index.example.com/v1//access-token"),
			s.expectGet(url, "foo", "isthebestmeshuggahalbum"))
	})
	s.check("pass_test TestMissingCred: garbage is not found", func() error {
		return s.expectNotFound("garbage")
	})

	// osxkeychain/osxkeychain_test.go: the server URL forms docker writes. A store for each,
	// without erasing in between, must read back with the URL it was stored with.
	forms := []string{
		"foobar.example.com",
		"foobar.example.com:2376",
		"//foobar.example.com:2376",
		"https://foobar.example.com:2376",
		"http://foobar.example.com:2376",
		"https://foobar.example.com:2376/some/path",
		"https://foobar.example.com:2376/some/other/path",
		"https://foobar.example.com:2376/some/other/path?foo=bar",
	}
	for i, url := range forms {
		i, url := i, url
		s.check("osxkeychain_test TestOSXKeychainHelperStoreRetrieve: "+url, func() error {
			user, secret := fmt.Sprintf("user-%d", i), fmt.Sprintf("secret-%d", i)
			return all(s.store(url, user, secret), s.expectGet(url, user, secret))
		})
	}
	s.forget(forms...)
	s.check("osxkeychain_test TestOSXKeychainHelperStoreWithUncleanPath: https://::1:8080//////location/../../hello", func() error {
		const url = "https://::1:8080//////location/../../hello"
		defer s.forget(url)
		return all(s.store(url, "testuser", "testsecret"), s.expectGet(url, "testuser", "testsecret"))
	})
	strict := []struct{ doc, storeURL, readURL string }{
		{"stored as https, retrieved using http", "https://foobar.example.com:2376", "http://foobar.example.com:2376"},
		{"stored as http, retrieved using https", "http://foobar.example.com:2376", "https://foobar.example.com:2376"},
		{"stored as http, retrieved without scheme", "http://foobar.example.com", "foobar.example.com:5678"},
		{"non-matching ports", "https://foobar.example.com:1234", "https://foobar.example.com:5678"},
		{"non-matching paths", "https://foobar.example.com:1234/one/two", "https://foobar.example.com:1234/five/six"},
	}
	for _, tc := range strict {
		tc := tc
		s.check("osxkeychain_test TestOSXKeychainHelperRetrieveStrict: "+tc.doc, func() error {
			return all(s.store(tc.storeURL, "hello", "world"), s.expectNotFound(tc.readURL), s.erase(tc.storeURL))
		})
	}
	s.check("osxkeychain_test TestMissingCredentials: get and erase of https://adsfasdf.invalid/asdfsdddd", func() error {
		const url = "https://adsfasdf.invalid/asdfsdddd"
		err := client.Erase(s.program, url)
		return all(s.expectNotFound(url),
			expectError("erase", err, "error erasing credentials - err: exit status 1, out: `"+credentials.NewErrCredentialsNotFound().Error()+"`"))
	})

	// registryurl/parse_test.go: what the reference helpers refuse to store.
	for _, url := range []string{"/foobar.example.com", "ftp://foobar.example.com:2376"} {
		url := url
		s.check("registryurl parse_test TestHelperParseURL: store of "+url+" is refused", func() error {
			if err := client.Store(s.program, &credentials.Credentials{ServerURL: url, Username: "u", Secret: "s"}); err == nil {
				s.forget(url)
				return fmt.Errorf("store %q succeeded", url)
			}
			return s.expectNotListed(url)
		})
	}

	// docker's CLI (cli/config/credentials/native_store.go): login, GetAll, login again, logout.
	const hub = "https://index.docker.io/v1/"
	s.check("docker cli nativeStore Store/Get: Docker Hub "+hub+" with a secret of JSON-special and non-ASCII characters", func() error {
		const secret = "p\"a\\ss/wörd\t✓\n{}"
		return all(s.store(hub, "dockeruser", secret), s.expectGet(hub, "dockeruser", secret))
	})
	s.check("docker cli nativeStore Store: an identity token of 4 KiB for registry.example.com:5000", func() error {
		token := strings.Repeat("eyJhbGciOiJSUzI1NiJ9.", 200)[:4096]
		return all(s.store("registry.example.com:5000", "<token>", token), s.expectGet("registry.example.com:5000", "<token>", token))
	})
	s.check("docker cli nativeStore GetAll: every listed server gets back with its username", func() error {
		listed, err := client.List(s.program)
		if err != nil {
			return fmt.Errorf("list: %v", err)
		}
		if len(listed) < 3 {
			return fmt.Errorf("list: %v, want at least %s, registry.example.com:5000 and %s", listed, hub, validServerAddress2)
		}
		for url, username := range listed {
			c, err := client.Get(s.program, url)
			if err != nil {
				return fmt.Errorf("get %q (listed): %v", url, err)
			}
			if c.Username != username {
				return fmt.Errorf("get %q: username %q, listed as %q", url, c.Username, username)
			}
		}
		return nil
	})
	s.check("docker cli nativeStore Store: a second login for "+hub+" replaces the first", func() error {
		before, err := client.List(s.program)
		if err != nil {
			return fmt.Errorf("list: %v", err)
		}
		if err := all(s.store(hub, "otheruser", "second"), s.expectGet(hub, "otheruser", "second"),
			s.expectListed(map[string]string{hub: "otheruser"})); err != nil {
			return err
		}
		after, err := client.List(s.program)
		if err != nil {
			return fmt.Errorf("list: %v", err)
		}
		if len(after) != len(before) {
			return fmt.Errorf("list: %d servers before the second login, %d after", len(before), len(after))
		}
		return nil
	})
	s.check("docker cli nativeStore Erase: logout of every listed server empties the listing", func() error {
		listed, err := client.List(s.program)
		if err != nil {
			return fmt.Errorf("list: %v", err)
		}
		urls := make([]string, 0, len(listed))
		for url := range listed {
			urls = append(urls, url)
		}
		sort.Strings(urls)
		for _, url := range urls {
			if err := all(s.erase(url), s.expectNotFound(url)); err != nil {
				return err
			}
		}
		left, err := client.List(s.program)
		if err != nil {
			return fmt.Errorf("list: %v", err)
		}
		if len(left) != 0 {
			return fmt.Errorf("list after logging out of %v: %v", urls, left)
		}
		return nil
	})

	if s.failed > 0 {
		fmt.Printf("# failed %d of %d\n", s.failed, s.total)
		os.Exit(1)
	}
	fmt.Printf("# passed %d of %d\n", s.total, s.total)
}
