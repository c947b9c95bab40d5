package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

type summary struct {
	OK       int                       `json:"ok"`
	Failed   int                       `json:"failed"`
	Errors   []string                  `json:"errors,omitempty"`
	Backends map[string]map[string]int `json:"backends"`
}

func main() {
	urls := flag.String("urls", "", "comma-separated URLs")
	n := flag.Int("n", 0, "requests per URL (0: use -duration)")
	duration := flag.Duration("duration", 0, "send requests for this long")
	interval := flag.Duration("interval", 20*time.Millisecond, "pause between requests")
	flag.Parse()
	list := strings.Split(*urls, ",")
	// A new connection per request: the service's rules pick a backend per
	// connection, and a kept-alive connection would stay on one.
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	s := summary{Backends: map[string]map[string]int{}}
	get := func(u string) {
		resp, err := c.Get(u)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
		if err != nil {
			s.Failed++
			if len(s.Errors) < 10 {
				s.Errors = append(s.Errors, fmt.Sprintf("%s %s: %v", time.Now().Format(time.RFC3339Nano), u, err))
			}
			if resp != nil {
				resp.Body.Close()
			}
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Hostname string `json:"hostname"`
		}
		backend := strings.TrimSpace(string(body))
		if json.Unmarshal(body, &r) == nil && r.Hostname != "" {
			backend = r.Hostname
		}
		if s.Backends[u] == nil {
			s.Backends[u] = map[string]int{}
		}
		s.Backends[u][backend]++
		s.OK++
	}
	deadline := time.Now().Add(*duration)
	for i := 0; ; i++ {
		if *n > 0 && i >= *n {
			break
		}
		if *n == 0 && time.Now().After(deadline) {
			break
		}
		for _, u := range list {
			get(u)
		}
		time.Sleep(*interval)
	}
	out, _ := json.Marshal(s)
	fmt.Println(string(out))
	if s.OK == 0 {
		os.Exit(1)
	}
}
