-- Flotilla's built-in rules for flink.apache.org/v1beta1 FlinkDeployment (the Flink
-- Kubernetes operator). Every entry function the interpreter may call is defined here.

local kube = require("kube")

local function present(v)
  return v ~= nil and v ~= ''
end

-- Job states (status.jobStatus.state) that are fine as they are: running, or terminal by
-- the user's decision, or on their way to one of those.
local SETTLED = {
  RUNNING = true, FINISHED = true, CANCELED = true, CANCELLING = true,
  SUSPENDED = true, RESTARTING = true,
}
-- Job states of a failed job.
local FAILED = { FAILED = true, FAILING = true }

-- Healthy when the job runs (or was stopped on purpose); unhealthy when it failed or the
-- operator reports the deployment FAILED, and while it is still starting, unless the operator
-- published an error for it (a user error that another cluster would hit too, so moving the
-- job would not help). A session cluster (no job) is healthy once its JobManager is READY.
-- No status yet: the script cannot tell, which makes the health Unknown.
function InterpretHealth(observedObj)
  local status = observedObj.status
  if status == nil then
    error('the FlinkDeployment has no status yet')
  end
  if status.lifecycleState == 'FAILED' then
    return false
  end
  local state = status.jobStatus and status.jobStatus.state
  if present(state) then
    if FAILED[state] then
      return false
    end
    if SETTLED[state] then
      return true
    end
  elseif observedObj.spec == nil or observedObj.spec.job == nil then
    if status.jobManagerDeploymentStatus == 'READY' then
      return true
    end
  end
  -- CREATED, INITIALIZING, RECONCILING, or nothing reported yet.
  return present(status.error) or status.jobManagerDeploymentStatus == 'ERROR'
end

-- Flink memory sizes are binary: "2048m" is 2048 MiB, "1g" 1 GiB. Kubernetes quantities
-- ("2Gi") pass through unchanged.
local MEMORY_UNITS = {
  b = '', bytes = '',
  k = 'Ki', kb = 'Ki', kibibytes = 'Ki',
  m = 'Mi', mb = 'Mi', mebibytes = 'Mi',
  g = 'Gi', gb = 'Gi', gibibytes = 'Gi',
  t = 'Ti', tb = 'Ti', tebibytes = 'Ti',
}

local function memoryQuantity(size)
  if size == nil then
    return nil
  end
  if type(size) == 'number' then
    return tostring(math.floor(size))
  end
  local number, unit = string.match(size, '^%s*(%d+)%s*(%a*)%s*$')
  if number == nil then
    return size
  end
  local suffix = MEMORY_UNITS[string.lower(unit)]
  if suffix == nil then
    return number .. unit
  end
  return number .. suffix
end

local function larger(a, b, value)
  if a == nil then return b end
  if b == nil then return a end
  if value(a) >= value(b) then return a end
  return b
end

local function cpuValue(cpu)
  if type(cpu) == 'number' then return cpu end
  return kube.getResourceQuantity(cpu)
end

-- One JobManager (or spec.jobManager.replicas) plus the TaskManagers: spec.taskManager.replicas,
-- or enough for the job's parallelism at taskmanager.numberOfTaskSlots slots each (Flink's
-- default is 1 slot). Each replica asks for the larger of the JobManager's and the
-- TaskManager's cpu and memory; node constraints and priority class come from
-- spec.podTemplate.
function GetReplicas(desiredObj)
  local spec = desiredObj.spec or {}
  local jobManager = spec.jobManager or {}
  local taskManager = spec.taskManager or {}

  local jmReplicas = jobManager.replicas or 1
  local tmReplicas = taskManager.replicas
  if tmReplicas == nil then
    local parallelism = spec.job and spec.job.parallelism
    if parallelism == nil then
      tmReplicas = 1
    else
      local config = spec.flinkConfiguration or {}
      local slots = tonumber(config['taskmanager.numberOfTaskSlots']) or 1
      if slots < 1 then slots = 1 end
      tmReplicas = math.ceil(parallelism / slots)
    end
  end

  local requires = { resourceRequest = {} }
  local jmResource = jobManager.resource or {}
  local tmResource = taskManager.resource or {}
  local cpu = larger(jmResource.cpu, tmResource.cpu, cpuValue)
  if cpu ~= nil then
    requires.resourceRequest.cpu = cpu
  end
  local memory = larger(memoryQuantity(jmResource.memory), memoryQuantity(tmResource.memory),
    kube.getResourceQuantity)
  if memory ~= nil then
    requires.resourceRequest.memory = memory
  end

  local podSpec = spec.podTemplate and spec.podTemplate.spec
  if podSpec ~= nil then
    local claim = {}
    claim.nodeSelector = podSpec.nodeSelector
    claim.tolerations = podSpec.tolerations
    if podSpec.affinity ~= nil and podSpec.affinity.nodeAffinity ~= nil then
      claim.hardNodeAffinity = podSpec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    end
    requires.nodeClaim = claim
    if present(podSpec.priorityClassName) then
      requires.priorityClassName = podSpec.priorityClassName
    end
  end
  if desiredObj.metadata ~= nil and present(desiredObj.metadata.namespace) then
    requires.namespace = desiredObj.metadata.namespace
  end
  return jmReplicas + tmReplicas, requires
end

-- What the operator reports that matters upstream, jobStatus included (so that a
-- statePreservation rule such as "{ .jobStatus.jobID }" can read the job id).
local REFLECTED = {
  'clusterInfo', 'error', 'jobManagerDeploymentStatus', 'jobStatus', 'lifecycleState',
  'observedGeneration', 'reconciliationStatus', 'taskManager',
}

function ReflectStatus(observedObj)
  if observedObj == nil or observedObj.status == nil then
    return nil
  end
  local status = {}
  for _, field in ipairs(REFLECTED) do
    status[field] = observedObj.status[field]
  end
  return status
end

-- The template shows the status of the first cluster (by name) that reported one; every
-- cluster's own status stays in the binding's aggregatedStatus. observedGeneration is left
-- alone: a member's generation counts the member's edits, not the template's.
function AggregateStatus(desiredObj, statusItems)
  if statusItems == nil then
    return desiredObj
  end
  local chosen = nil
  for i = 1, #statusItems do
    if statusItems[i].status ~= nil then
      chosen = statusItems[i].status
      break
    end
  end
  if chosen == nil then
    return desiredObj
  end
  if desiredObj.status == nil then
    desiredObj.status = {}
  end
  for _, field in ipairs(REFLECTED) do
    if field ~= 'observedGeneration' then
      desiredObj.status[field] = chosen[field]
    end
  end
  return desiredObj
end

-- The ServiceAccount the operator runs the job with, and what the pod templates refer to.
function GetDependencies(desiredObj)
  local spec = desiredObj.spec or {}
  local namespace = desiredObj.metadata and desiredObj.metadata.namespace
  local dependencies = {}
  local seen = {}
  local function add(ref)
    local key = ref.kind .. '/' .. ref.name
    if not seen[key] then
      seen[key] = true
      table.insert(dependencies, ref)
    end
  end
  if present(spec.serviceAccount) and spec.serviceAccount ~= 'default' then
    add({ apiVersion = 'v1', kind = 'ServiceAccount', namespace = namespace, name = spec.serviceAccount })
  end
  local templates = { spec.podTemplate, spec.jobManager and spec.jobManager.podTemplate,
    spec.taskManager and spec.taskManager.podTemplate }
  for i = 1, 3 do
    if templates[i] ~= nil then
      for _, ref in ipairs(kube.getPodDependencies(templates[i], namespace)) do
        add(ref)
      end
    end
  end
  return dependencies
end
