// Pays a 402-gated POST with the official x402 TypeScript client
// (@x402/fetch + @x402/evm, viem local account) and prints one JSON line:
// {"status":201,"body":"...","payer":"0x...","paymentResponse":{...}}.
// It speaks v2 (PAYMENT-REQUIRED header -> PAYMENT-SIGNATURE) and, when the
// server sends only an x402 v1 body, v1 (body -> X-PAYMENT) on Base Sepolia.
//
// Env:
//   X402_URL        the URL to POST to (required)
//   X402_BODY       the JSON request body (default: a small TASK job)
//   X402_PAYER_KEY  the payer's private key (default: anvil/hardhat account #0,
//                   a public test key that holds no real funds)
import { wrapFetchWithPaymentFromConfig, decodePaymentResponseHeader } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm";
import { ExactEvmSchemeV1 } from "@x402/evm/v1";
import { privateKeyToAccount } from "viem/accounts";

const url = process.env.X402_URL;
if (!url) {
  console.error("set X402_URL to the URL to pay");
  process.exit(2);
}
const key =
  process.env.X402_PAYER_KEY ??
  "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
const body =
  process.env.X402_BODY ??
  JSON.stringify({ job_type: "TASK", payload: { task: "echo", input: "hi" }, user_id: "interop" });

const account = privateKeyToAccount(key);
const fetchWithPayment = wrapFetchWithPaymentFromConfig(fetch, {
  schemes: [
    { network: "eip155:*", client: new ExactEvmScheme(account) },
    { network: "base-sepolia", client: new ExactEvmSchemeV1(account), x402Version: 1 },
  ],
});

try {
  const res = await fetchWithPayment(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  const text = await res.text();
  const header = res.headers.get("PAYMENT-RESPONSE") ?? res.headers.get("X-PAYMENT-RESPONSE");
  const paymentResponse = header ? decodePaymentResponseHeader(header) : null;
  console.log(JSON.stringify({ status: res.status, body: text, payer: account.address, paymentResponse }));
} catch (error) {
  console.error(`payment failed: ${error instanceof Error ? error.stack : String(error)}`);
  process.exit(1);
}
