// The test clock (decisions.md): GET /v1/test_clock -> {now}; POST /v1/test_clock/advance
// {seconds} moves a test environment's clock forward and runs the work that falls due (ledger
// confirmations and expiries, and the tier moves they cause). Live environments answer 403 forbidden.
import { z } from 'zod';
import type { EnvironmentClocks } from '../../catalog/clock.js';
import { ApiError } from '../../errors/api-error.js';
import type { Principal } from '../../tenancy/types.js';
import { type AnyRoute, type RequestContext, route } from '../route.js';
import { iso } from '../wire.js';

const advanceBody = z.strictObject({
  seconds: z
    .number()
    .int()
    .min(1)
    .max(10 * 366 * 86_400)
    .describe('How far to move the clock forward (at most ten years at once).'),
});

const clockSchema = z.object({ now: z.string() });

function testEnvironment(p: Principal): { id: string; runtimeClass: 'test' | 'live' } {
  if (p.environment === null) throw new ApiError('environment_required');
  if (p.environment.runtimeClass !== 'test') throw new ApiError('forbidden', { message: 'Only test environments have a test clock.' });
  return p.environment;
}

export function testClockRoutes(deps: {
  clocks: EnvironmentClocks;
  runDue(environmentId: string, nowMs: number): Promise<number>;
}): AnyRoute[] {
  const auth = { kind: 'credential' as const, allow: ['secret' as const, 'pat' as const, 'session' as const] };
  return [
    route({
      method: 'GET',
      path: '/v1/test_clock',
      summary: "The test environment's clock",
      tag: 'Test clock',
      auth: { ...auth, scopes: ['config:read'] },
      responses: { 200: { description: '{now}', schema: clockSchema } },
      handler: async (ctx: RequestContext) => {
        const env = testEnvironment(ctx.principal);
        return { status: 200, body: { now: iso(await deps.clocks.now(env.id)) } };
      },
    }),
    route({
      method: 'POST',
      path: '/v1/test_clock/advance',
      summary: "Move the test environment's clock forward and run every job that falls due",
      tag: 'Test clock',
      auth: { ...auth, scopes: ['config:write'] },
      body: advanceBody,
      responses: { 200: { description: '{now, jobs_run}', schema: clockSchema } },
      handler: async (ctx: RequestContext<z.infer<typeof advanceBody>>) => {
        const env = testEnvironment(ctx.principal);
        const nowMs = await deps.clocks.advance(env.id, env.runtimeClass, ctx.body.seconds);
        const settled = await deps.runDue(env.id, nowMs);
        return { status: 200, body: { now: iso(nowMs), customers_settled: settled } };
      },
    }),
  ];
}
