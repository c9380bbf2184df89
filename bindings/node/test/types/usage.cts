// Typed usage of the CommonJS entry point; checked by `tsc --noEmit` (never run).
import sandtrap = require('sandtrap');

const sb = new sandtrap.Sandbox({ fsReadable: ['/usr'] });
export const pending: Promise<sandtrap.RunResult> = sb.run(['/bin/true']);
export const isErr: boolean = new sandtrap.PolicyError('x') instanceof sandtrap.SandtrapError;
// @ts-expect-error: CommonJS has no default export
void sandtrap.default;
