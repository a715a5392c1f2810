package sweep

import (
	"net"
	"strconv"
	"testing"
)

// One broker's three ports must differ and be free on TCP and UDP once
// handed over (they are released together, after every pick). It does not
// show the race the holding closes: Linux rarely hands a port just released
// to the next bind of port 0, so picking and releasing one by one would pass
// it too. It catches ports left held and a port handed out twice.
func TestFreePortsAreDistinctAndFree(t *testing.T) {
	for range 50 {
		ports, err := freePorts(3)
		if err != nil {
			t.Fatal(err)
		}
		if len(ports) != 3 || ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
			t.Fatalf("ports %v: want three distinct", ports)
		}
		for _, p := range ports {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				t.Fatalf("port %d not free on TCP: %v", p, err)
			}
			u, err := net.ListenPacket("udp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				l.Close()
				t.Fatalf("port %d not free on UDP: %v", p, err)
			}
			l.Close()
			u.Close()
		}
	}
}
