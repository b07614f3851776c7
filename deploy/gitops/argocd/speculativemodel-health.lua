-- Argo CD health check for specfleet.io/SpeculativeModel (docs/gitops.md).
-- Healthy only when the operator has observed the current generation and says Ready;
-- Degraded when it says Degraded (e.g. speculation disabled after rollbacks) or
-- ConfigRejected (the spec's config lost its trial: the stable pods run the last good one);
-- Progressing otherwise (rollout, canary trial, or status not caught up with spec).
-- Lua 5.1 as Argo CD runs it (gopher-lua); tested with lua5.4.
local hs = {}

local function find(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, condition in ipairs(conditions) do
    if condition.type == kind then
      return condition
    end
  end
  return nil
end

local function describe(condition, fallback)
  local reason = condition.reason or ""
  local message = condition.message or ""
  if reason ~= "" and message ~= "" then
    return reason .. ": " .. message
  elseif reason ~= "" or message ~= "" then
    return reason .. message
  end
  return fallback
end

local generation = obj.metadata and obj.metadata.generation
local status = obj.status
if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the specfleet operator to report status"
  return hs
end
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the specfleet operator to observe generation " .. tostring(generation)
  return hs
end

local degraded = find(status.conditions, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(degraded, "Degraded")
  return hs
end

local rejected = find(status.conditions, "ConfigRejected")
if rejected ~= nil and rejected.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(rejected, "ConfigRejected")
  return hs
end

local progressing = find(status.conditions, "Progressing")
if progressing ~= nil and progressing.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(progressing, "Progressing")
  return hs
end

local ready = find(status.conditions, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
if generation ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Ready describes generation " .. tostring(ready.observedGeneration) .. ", not " .. tostring(generation)
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  return hs
end
hs.status = "Progressing"
hs.message = describe(ready, "Not ready")
return hs
