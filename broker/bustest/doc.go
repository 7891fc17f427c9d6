// Package bustest is the conformance suite every broker.Bus implementation
// must pass, in the manner of watermill's pubsub/tests: one table of
// behaviours, run against each backend.
//
//	func TestMemory(t *testing.T) {
//		bustest.Run(t, func(t *testing.T) bustest.Harness {
//			hub := broker.NewMemoryHub()
//			return bustest.Harness{
//				Prefix:  "asyrevel.test",
//				Connect: func(t testing.TB, name string) broker.Bus { return hub.Connect(name) },
//			}
//		})
//	}
package bustest
