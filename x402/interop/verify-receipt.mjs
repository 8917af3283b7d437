// Verifies a coordinator receipt with standard Ethereum tooling (viem), as
// README "Verifying a receipt" describes. Prints {"valid":bool,"signer":...}.
//
// Env: RECEIPT (the receipt JSON), OUTPUT (the job's result.output JSON).
import { verifyMessage, recoverMessageAddress, sha256, toBytes } from "viem";
import { publicKeyToAddress } from "viem/accounts";
import { secp256k1 } from "@noble/curves/secp256k1";

// RFC 8785 for JSON values: sorted keys, no whitespace, ES number form (JSON.stringify's).
const canonical = (v) =>
  Array.isArray(v) ? `[${v.map(canonical).join(",")}]`
  : v && typeof v === "object"
    ? `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`
    : JSON.stringify(v);

const receipt = JSON.parse(process.env.RECEIPT);
const output = JSON.parse(process.env.OUTPUT);
const { signature, ...body } = receipt;
const uncompressed = secp256k1.ProjectivePoint.fromHex(body.provider_pubkey.slice(2)).toHex(false);
const address = publicKeyToAddress(`0x${uncompressed}`);
const message = canonical(body);
const valid = await verifyMessage({ address, message, signature });
const signer = await recoverMessageAddress({ message, signature });
const hashOk = body.output_hash === `sha256:${sha256(toBytes(canonical(output))).slice(2)}`;
console.log(JSON.stringify({ valid: valid && hashOk, signer, address }));
