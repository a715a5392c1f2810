package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fibril-go/fibril/client"
)

// Publish an order with confirmation, then consume and settle it. A broker on
// this machine needs no TLS options: the client trusts the CA the broker
// published for its port. (No Output comment: it needs a running broker.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The built-in fibril/fibril login works from loopback; Transport "tcp" for TCP.
	c, err := client.Dial(ctx, "localhost:9876", client.ClientOptions{ClientName: "example",
		Credentials: &client.Credentials{Username: "fibril", Password: "fibril"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	order := map[string]any{"id": "order-42", "amount": 30}
	offset, err := c.Publisher("orders").PublishConfirmed(ctx, client.JSON(order).PartitionKey("order-42"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("durable at offset", offset)

	sub, err := c.SubscribeTopic(ctx, "orders", client.SubscribeOptions{Prefetch: 16})
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close()
	d := <-sub.Deliveries()
	var got map[string]any
	if err := d.DecodeJSON(&got); err != nil {
		_ = d.Fail(ctx) // poison message: dead-letter it
		return
	}
	fmt.Println("got", got["id"], "from partition", d.Partition, "retries", d.Retries)
	_ = d.Complete(ctx)
}
