local result = window()
result[#result + 1] = redis.call('ZRANGE', archive, 0, -1)
return result
