// Command asyrevel trains vertical federated learning models with AsyREVEL,
// an asynchronous zeroth-order algorithm, over NATS JetStream.
//
// Run "asyrevel help" for the commands.
package main
