// The test clock (decisions.md): GET /v1/test_clock -> {now}; POST /v1/test_clock/advance
// {seconds} moves a test environment's clock forward and runs the work that falls due (ledger
// confirmations and expiries, the tier moves they cause, reward expiry, challenge ends) and says
// what it settled. Live environments answer 403 forbidden before anything else, the body included
// (so advance validates its body in the handler, after the environment check).
import { z } from 'zod';
import type { EnvironmentClocks } from '../../catalog/clock.js';
import { ApiError } from '../../errors/api-error.js';
import type { Principal } from '../../tenancy/types.js';
import { type AnyRoute, type RequestContext, route } from '../route.js';
import { validate } from '../validation.js';
import { isoTime } from '../../util/iso-time.js';
import { iso } from '../wire.js';

const advanceBody = z.strictObject({
  seconds: z
    .number()
    .int()
    .min(1)
    .max(10 * 366 * 86_400)
    .describe('How far to move the clock forward (at most ten years at once).'),
});

const clockSchema = z.strictObject({ now: z.string().describe("The environment's clock (RFC 3339).") });
const advanceSchema = z.strictObject({
  now: z.string().describe("The environment's clock after the move (RFC 3339)."),
  customers_settled: z
    .number()
    .int()
    .min(0)
    .describe('Customers whose due work ran (pending confirmations, expiries, tier checks, reward issuance expiry); each counts once.'),
  challenges_ended: z.number().int().min(0).describe('Challenges that reached ends_at and were ended.'),
  campaigns_ended: z.number().int().min(0).describe('Active or paused campaigns that reached ends_at and were ended.'),
});

function testEnvironment(p: Principal): { id: string; runtimeClass: 'test' | 'live' } {
  if (p.environment === null) throw new ApiError('environment_required');
  if (p.environment.runtimeClass !== 'test') throw new ApiError('forbidden', { message: 'Only test environments have a test clock.' });
  return p.environment;
}

export function testClockRoutes(deps: {
  clocks: EnvironmentClocks;
  runDue(environmentId: string, nowMs: number): Promise<{ customersSettled: number; challengesEnded: number; campaignsEnded: number }>;
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
      idempotent: 'optional',
      // Validated in the handler, after the environment check (a live environment is 403 whatever the body).
      docBody: advanceBody,
      responses: { 200: { description: '{now, customers_settled, challenges_ended, campaigns_ended}', schema: advanceSchema } },
      handler: async (ctx: RequestContext) => {
        const env = testEnvironment(ctx.principal);
        const body = validate(advanceBody, ctx.body ?? {}, 'body');
        // A run again (its answer lost) moves nothing: it answers the clock as it is now, and runs
        // what is due then (what a first run that died did not get to).
        const nowMs = await deps.clocks.advance(env.id, env.runtimeClass, body.seconds, ctx.callId);
        const run = await deps.runDue(env.id, nowMs);
        const answer: z.infer<typeof advanceSchema> = {
          now: isoTime(nowMs),
          customers_settled: run.customersSettled,
          challenges_ended: run.challengesEnded,
          campaigns_ended: run.campaignsEnded,
        };
        return { status: 200, body: answer };
      },
    }),
  ];
}
