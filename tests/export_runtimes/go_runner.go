// Fires N GET requests at URL through the exported Go limits (package ratelimits), all started
// at once, and prints {"statuses": {...}, "elapsed_s": ...} (first start to last answer).
//
//	GO111MODULE=off GOPATH=DIR:/usr/share/gocode go build -o runner runner && ./runner URL N
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"ratelimits"
)

func main() {
	url := os.Args[1]
	n, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	limits := ratelimits.NewHostLimits()
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	started := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			release, err := limits.Wait(context.Background())
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			defer release()
			response, err := http.Get(url)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			io.Copy(io.Discard, response.Body)
			response.Body.Close()
			mu.Lock()
			statuses[strconv.Itoa(response.StatusCode)]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	out, _ := json.Marshal(map[string]interface{}{"statuses": statuses, "elapsed_s": time.Since(started).Seconds()})
	fmt.Println(string(out))
}
